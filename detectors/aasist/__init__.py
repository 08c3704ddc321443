"""AASIST / AASIST-L import: our own implementation of the published architecture
(Jung et al., ICASSP 2022), used only offline to convert a user's checkpoint to ONNX.

Nothing in this package imports torch at module level: ``config`` is numpy only, and
``torch_model`` / ``importer`` import torch inside their functions, so the runtime (and
any import of ``detectors``) never needs it. torch is the ``convert`` extra.
"""
