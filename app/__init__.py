"""Speculative Decoding Lab: engine, models, hardware model, UI and CLI.

Kept free of imports so that `app.trace` can be used without torch (visualizations/)."""
