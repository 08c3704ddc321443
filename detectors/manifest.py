"""Model manifests: the JSON file that describes one ONNX model detector (DESIGN §5).

A model lives in the models directory as ``NAME-VERSION.onnx`` beside
``NAME-VERSION.manifest.json``. The manifest names the file and its sha256, the input
(tensor name, rate, window, hop), how to read the score (and the embedding, if any)
from the outputs, the thresholds per codec (defaults only: policy overrides them),
the provenance and the licence. A manifest is a trust boundary: pydantic validates it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from detectors.alert_schema import Dimension, LegRole
from detectors.contract import DetectorSpec

MANIFEST_SUFFIX = ".manifest.json"
MANIFEST_FORMAT: Literal[1] = 1

Unit = Annotated[float, Field(ge=0.0, le=1.0)]


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class InputSpec(_Strict):
    """The model's audio input: float32 ``[batch, samples]`` (mono, no normalisation
    beyond int16 / 32768) at ``sample_rate``."""

    name: str
    sample_rate: int = Field(gt=0)
    window: int = Field(gt=0, description="samples per window at sample_rate")
    hop: int = Field(gt=0, description="samples between window starts")
    dynamic_batch: bool = True


class OutputSpec(_Strict):
    """How the score (and embedding) come out.

    ``score_transform``: ``identity`` (already in [0, 1]), ``sigmoid`` (a logit), or
    ``softmax`` over the last axis taking ``score_index``. ``invert``: the output says
    "genuine" and the runtime reports 1 - p (risk is always "higher = worse").
    """

    score: str
    score_transform: Literal["identity", "sigmoid", "softmax"] = "identity"
    score_index: int = Field(default=0, ge=0)
    invert: bool = False
    embedding: str | None = None
    embedding_dim: int = Field(default=0, ge=0)


class ModelManifest(_Strict):
    format: Literal[1] = MANIFEST_FORMAT
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_\-]*$")
    version: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-+]*$")
    dimension: Dimension
    file: str = Field(pattern=r"^[^/\\]+\.onnx$")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    input: InputSpec
    output: OutputSpec
    min_net_speech_s: float = Field(default=0.0, ge=0.0)
    max_concealed_ratio: Unit = 0.2
    roles: tuple[LegRole, ...] = (LegRole.EXTERNAL,)
    batchable: bool = True
    thresholds: dict[str, Unit] = Field(description="per codec (pcmu, pcma, ...) and default")
    provenance: str
    licence: str
    fixture: bool = Field(
        default=False, description="a runtime test fixture with random weights, not a detector"
    )
    description: str = ""
    training_speakers: tuple[str, ...] = Field(
        default=(), description="speakers the model was trained on (never evaluated on)"
    )

    @model_validator(mode="after")
    def _check(self) -> ModelManifest:
        if "default" not in self.thresholds:
            raise ValueError("thresholds must include 'default'")
        if self.output.embedding is not None and self.output.embedding_dim <= 0:
            raise ValueError("an embedding output needs embedding_dim > 0")
        return self

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}"

    def threshold_for(self, codec: str | None = None) -> float:
        if codec is not None and codec.lower() in self.thresholds:
            return self.thresholds[codec.lower()]
        return self.thresholds["default"]

    def detector_spec(self, codec: str | None = None) -> DetectorSpec:
        return DetectorSpec(
            name=self.name,
            version=self.version,
            dimension=self.dimension,
            sample_rate=self.input.sample_rate,
            window=self.input.window,
            hop=self.input.hop,
            min_net_speech_s=self.min_net_speech_s,
            max_concealed_ratio=self.max_concealed_ratio,
            roles=frozenset(self.roles),
            batchable=self.batchable and self.input.dynamic_batch,
            threshold=self.threshold_for(codec),
            embedding_dim=self.output.embedding_dim,
        )


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def manifest_path_for(model_dir: Path, key: str) -> Path:
    return model_dir / f"{key}{MANIFEST_SUFFIX}"


def load_manifest(path: Path) -> ModelManifest:
    """Parse and validate a manifest file (raises ValueError with the file's name)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return ModelManifest.model_validate(data)
    except (OSError, json.JSONDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: invalid model manifest: {exc}") from exc


def dump_manifest(manifest: ModelManifest, path: Path) -> None:
    text = json.dumps(manifest.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"
    path.write_text(text, encoding="utf-8")
