"""Checks a user runs on their own extensions, without pytest
(``python -m hpm_mm.testing.check_mask_generator MODULE:CLASS``)."""
