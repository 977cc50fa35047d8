"""The lab: every script that trains, distils, evaluates or writes the model card of a draft
(run as `python -m research.<script>`). Research imports the product (app/); the product never
imports research. What these scripts write (weights, logs, cards) lands in demo_models/, found
through app.assets."""
