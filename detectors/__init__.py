"""Analysis: audio windows in, scores and alert objects out. Knows nothing of SIP."""
