"""Speaker embeddings: CallShield's own implementation of the Resemblyzer voice encoder
architecture, converted to ONNX by ``callshield models derive-speaker`` from the weights
in the ``resemblyzer`` wheel (Apache-2.0). The runtime needs only onnxruntime + numpy."""
