"""research.compact: the rewritten tokenizer.json is the same JSON, loads as the same tokenizer,
and is smaller."""
import json
import shutil

from transformers import AutoTokenizer

from app.assets import TINY_TARGET_DIR
from research.compact import compact_tokenizer

TEXT = "Héllo, wörld! 1234 — ROMEO:\n\tdone 🙂"


def test_a_compacted_tokenizer_is_the_same_json_and_the_same_tokenizer(tmp_path):
    AutoTokenizer.from_pretrained(str(TINY_TARGET_DIR)).save_pretrained(tmp_path)
    pretty = tmp_path / "tokenizer.json"
    pretty.write_text(json.dumps(json.loads(pretty.read_text(encoding="utf-8")), ensure_ascii=False,
                                 indent=2), encoding="utf-8")  # as save_pretrained may write it
    before_json = json.loads(pretty.read_text(encoding="utf-8"))
    before = AutoTokenizer.from_pretrained(str(tmp_path))
    saved = compact_tokenizer(tmp_path)
    assert saved > 0
    assert json.loads(pretty.read_text(encoding="utf-8")) == before_json
    after = AutoTokenizer.from_pretrained(str(tmp_path))
    assert after.get_vocab() == before.get_vocab()
    ids = after(TEXT, add_special_tokens=False)["input_ids"]
    assert ids == before(TEXT, add_special_tokens=False)["input_ids"]
    assert after.decode(ids) == TEXT
    assert compact_tokenizer(tmp_path) == 0  # already compact: nothing more to save


def test_a_directory_without_a_tokenizer_json_is_left_alone(tmp_path):
    shutil.copy(TINY_TARGET_DIR / "config.json", tmp_path / "config.json")
    assert compact_tokenizer(tmp_path) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]
