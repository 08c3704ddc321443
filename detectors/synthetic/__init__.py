"""CallShield's own synthetic_voice model for 8 kHz telephone audio (issue 6a): the
corpus split, spoof generation, the telephone channel, the model, training and export.
Training-time only (``callshield models train-synthetic``); the runtime loads the ONNX."""
