"""The replay dimension and the benign audio allowlist: audio fingerprints (DESIGN §2, §5)."""
