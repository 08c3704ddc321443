"""``callshield replay``: a recorded call through the live pipeline in virtual time."""
