"""``callshield eval``: how good each installed detector is on a user's labelled audio,
measured through the live pipeline (codec, RTP, jitter buffer, windowing, scheduler,
fusion) in virtual time. See ``detectors.eval.engine`` for the conditions and rules."""
