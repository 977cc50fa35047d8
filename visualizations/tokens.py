"""The streamed output as HTML: one <span> per token, coloured by its fate.

Every token text is escaped here (gr.HTML inserts raw HTML, and tokens can be anything,
`<script>` included). Pass `STYLE` to the page once (e.g. `gr.Blocks(css=STYLE)`), or ask
`token_stream_html(..., with_style=True)` to inline it.
"""
from __future__ import annotations

import html

from app.trace import FATES, Piece

from .colors import FATE_COLORS, FATE_TINTS
from .layout import fmt_prob

FATE_MEANINGS = {
    "accepted": "draft token the target accepted",
    "rejected": "draft token the target rejected (never emitted)",
    "correction": "target's resample after a rejection",
    "bonus": "extra target token when every draft was accepted",
    "target": "plain decoding: one token per target pass",
}

# A special token (Piece.special: "<|im_end|>", "</s>") is the model's own end of reply, a real
# token of the run (it counts in tokens per pass), shown as words.
SPECIAL_TEXT = "end of reply"

END_MARKER = '<span id="stream-end" data-testid="stream-end">■ end of stream</span>'


# Each fate's fill: its tint, and for rejected tokens (never emitted) diagonal white hatching
# too, so that rejected and bonus differ in pattern as well as in hue.
FATE_FILLS = {fate: FATE_TINTS[fate] for fate in FATES} | {
    "rejected": f"repeating-linear-gradient(135deg, {FATE_TINTS['rejected']} 0 4px, #FFFFFF 4px 7px)"}
STRIKE = "linear-gradient(transparent 45%, #D55E00 45%, #D55E00 60%, transparent 60%)"


def _fate_rules() -> str:
    rules = []
    for fate in FATES:
        swatch = f"{STRIKE}, {FATE_FILLS[fate]}" if fate == "rejected" else FATE_FILLS[fate]
        rules.append(f".tok-{fate} {{ background: {FATE_FILLS[fate]}; "
                     f"border-bottom: 3px solid {FATE_COLORS[fate]}; }}")
        rules.append(f".swatch-{fate} {{ background: {swatch}; "
                     f"border: 2px solid {FATE_COLORS[fate]}; }}")
    return "\n".join(rules)


STYLE = """
.sd-stream, .sd-prompt { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
  font-size: 1.2rem; line-height: 2.0; white-space: pre-wrap; word-break: break-word; color: #111; }
.sd-prompt { color: #444; margin-bottom: 0.4em; }
.sd-prompt-label { font-family: sans-serif; font-size: 0.8em; font-weight: bold; color: #666;
  margin-right: 0.6em; white-space: normal; }
.tok { white-space: pre-wrap; border-radius: 3px; padding: 1px 0; margin: 0 1px; }
.tok-rejected { text-decoration: line-through; text-decoration-thickness: 2px;
  text-decoration-color: #D55E00; color: #7a4a2a; }
.tok-nl { opacity: 0.5; }
.tok-special { font-family: sans-serif; font-size: 0.75em; font-style: italic; padding: 0 0.3em; }
#stream-end { display: inline-block; margin-left: 0.6em; font-family: sans-serif;
  font-size: 0.8em; color: #555; }
.sd-legend { font-family: sans-serif; font-size: 1.0rem; display: flex; flex-wrap: wrap;
  gap: 0.4em 1.4em; }
.sd-legend-item { display: inline-flex; align-items: center; gap: 0.4em; }
.sd-swatch { display: inline-block; width: 1.6em; height: 1.1em; border-radius: 3px; }
""" + _fate_rules() + "\n"


def _token_body(text: str, *, mark_newlines: bool = True) -> str:
    """Escaped text; each newline becomes a line break, after a faint ↵ when `mark_newlines`
    (so that a newline token stays visible and hoverable)."""
    parts = text.replace("\r\n", "\n").split("\n")
    escaped = [html.escape(p, quote=True) for p in parts]
    newline = '<span class="tok-nl">↵</span><br>' if mark_newlines else "<br>"
    return newline.join(escaped)


def _title(piece: Piece) -> str:
    special = f" · special token {piece.text}: the model ends its reply" if piece.special else ""
    return (f"step {piece.step} · {piece.fate} · "
            f"p={fmt_prob(piece.p)} · q={fmt_prob(piece.q)}{special}")


def token_span(piece: Piece) -> str:
    """One token as a <span class="tok tok-FATE"> with a hover title (step, fate, p, q); a
    special token (Piece.special, e.g. the chat's end of turn) reads as SPECIAL_TEXT, its raw
    text in the title."""
    fate = html.escape(piece.fate, quote=True)
    body = (f'<span class="tok-special">{SPECIAL_TEXT}</span>' if piece.special
            else _token_body(piece.text))
    return (f'<span class="tok tok-{fate}" data-fate="{fate}" data-step="{int(piece.step)}" '
            f'title="{html.escape(_title(piece), quote=True)}">{body}</span>')


def token_stream_html(pieces: list[Piece], *, finished: bool, with_style: bool = False) -> str:
    """The whole stream so far; with `finished`, an explicit end marker (for browser tests)."""
    body = "".join(token_span(p) for p in pieces)
    if finished:
        body += END_MARKER
    style = f"<style>{STYLE}</style>" if with_style else ""
    return f'{style}<div class="sd-stream" data-testid="token-stream">{body}</div>'


def legend_html() -> str:
    """A swatch per fate with its meaning in one short phrase."""
    items = "".join(
        f'<span class="sd-legend-item"><span class="sd-swatch swatch-{fate}"></span>'
        f'<b>{fate}</b> — {html.escape(FATE_MEANINGS[fate])}</span>'
        for fate in FATES)
    return f'<div class="sd-legend">{items}</div>'


def prompt_html(prompt: str) -> str:
    """The prompt, escaped, in the stream's font so it reads as the start of the text."""
    return (f'<div class="sd-prompt"><span class="sd-prompt-label">PROMPT</span>'
            f'{_token_body(prompt, mark_newlines=False)}</div>')
