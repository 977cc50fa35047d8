"""How many resamples every percentile bootstrap of the lab draws (research.evaluate's α
intervals and paired differences, research.eval_set's per-category table, research.eval_report's
speed-up medians).

An interval's end is itself a Monte-Carlo estimate. For the 2.5th percentile of a near-normal
bootstrap distribution of spread sigma its standard error is about
sqrt(0.025 * 0.975 / draws) / phi(1.96) * sigma = 2.67 sigma / sqrt(draws): 0.06 sigma at 2,000
draws, enough to carry a 17-prompt category's lower end across a goal from one seed to the next
(research/RESULTS.md: the languages row at 0.40006 with seed 0, 0.3944-0.4000 over 20 seeds);
0.019 sigma at 20,000, in well under a second for the 148-reply realistic set.
tests/research/test_eval_set.py measures that spread over seeds.
"""
BOOTSTRAP_DRAWS = 20_000
