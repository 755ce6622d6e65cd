"""Checks a user runs on their own extensions, without pytest
(``python tools/misc/check_mask_generator.py MODULE:CLASS``)."""
