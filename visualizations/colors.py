"""One palette for every figure and the token stream.

Okabe & Ito's colour-blind-safe palette ("Color Universal Design", 2008): eight colours that
stay distinguishable under the common forms of colour blindness. Shape or line style always
repeats the colour's message too (struck-through rejected tokens, marker symbols per phase,
dashed datasheet roofs), so nothing depends on hue alone.
"""
from __future__ import annotations

# Okabe-Ito, by name.
ORANGE = "#E69F00"
SKY_BLUE = "#56B4E9"
BLUISH_GREEN = "#009E73"
YELLOW = "#F0E442"
BLUE = "#0072B2"
VERMILLION = "#D55E00"
REDDISH_PURPLE = "#CC79A7"
BLACK = "#000000"
GREY = "#7F7F7F"

# Token fates (see app.trace.FATES).
FATE_COLORS = {
    "accepted": BLUISH_GREEN,
    "rejected": VERMILLION,
    "correction": BLUE,
    "bonus": REDDISH_PURPLE,
    "target": GREY,
}
# Light tints of the same hues, as token backgrounds behind dark text. Bonus is a deeper tint
# (~60% of its hue) than the others (~20%): at 20% it looked like rejected's peach; rejected
# is also hatched (tokens.FATE_FILLS), so the two differ in pattern, not in hue alone.
FATE_TINTS = {
    "accepted": "#CCECE3",
    "rejected": "#F7DFCC",
    "correction": "#CCE3F0",
    "bonus": "#E0AFCA",
    "target": "#ECECEC",
}

# Models and the phases of a forward pass.
MODEL_COLORS = {"draft": ORANGE, "target": BLUE}
PHASE_COLORS = {
    "draft": ORANGE,       # the draft model proposing one token
    "verify": BLUE,        # the target scoring gamma + 1 positions at once
    "decode": SKY_BLUE,    # the target producing one token (autoregressive baseline)
    "prefill": GREY,       # either model reading the prompt
}
PHASE_SYMBOLS = {"draft": "circle", "verify": "diamond", "decode": "square",
                 "prefill": "triangle-up"}

# What limits a pass (app.hardware's classification).
BOUND_COLORS = {"memory": BLUE, "compute": VERMILLION, "overhead": GREY}

# Rooflines: measured ceilings solid, datasheet ceilings dashed.
ROOF_COLORS = {"measured": BLACK, "datasheet": GREY}

# Inspector distributions.
DIST_COLORS = {"p_target": BLUE, "q_draft": ORANGE, "residual": BLUISH_GREEN}


def fate_color(fate: str) -> str:
    """Colour of a token fate; grey for anything unknown."""
    return FATE_COLORS.get(fate, GREY)


def phase_color(phase: str) -> str:
    """Colour of a forward-pass phase; black for anything unknown."""
    return PHASE_COLORS.get(phase, BLACK)
