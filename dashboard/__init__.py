"""The analyst dashboard (web process). Never imports numpy, onnxruntime, av or sip_bridge."""
