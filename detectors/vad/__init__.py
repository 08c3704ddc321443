"""Speech activity: Silero VAD (MIT, the ONNX file of the ``silero-vad`` wheel), installed
by ``callshield models install-vad`` and run streaming per leg."""
