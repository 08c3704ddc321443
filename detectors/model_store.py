"""The models directory: installed ONNX models and their manifests, checked by sha256.

Nothing is ever downloaded: ``install`` copies a model (and its manifest) from a local
path, verifying the file against the manifest's sha256 before and after the copy, and
the runtime verifies it again when it loads it. ``callshield models`` is the face of
this module (``detectors.models_cli``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from detectors.manifest import (
    MANIFEST_SUFFIX,
    ModelManifest,
    dump_manifest,
    load_manifest,
    manifest_path_for,
    sha256_file,
)


def _default_models_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "callshield" / "models"


class ModelSettings(BaseSettings):
    """Where models live (``CALLSHIELD_MODELS_DIR``)."""

    model_config = SettingsConfigDict(env_prefix="CALLSHIELD_", extra="ignore")
    models_dir: Path = Field(default_factory=_default_models_dir)
    # the detector models the bridge (and replay) load, by manifest name, comma-separated;
    # empty = every installed one. One model per scored dimension: with two installed
    # models of one dimension (e.g. callshield-synthetic-8k and callshield-aasist-lite-8k,
    # both synthetic_voice) the bridge refuses to start until this names the one to use
    detector_models: str = ""


@dataclass(frozen=True, slots=True)
class Installed:
    manifest: ModelManifest
    manifest_path: Path
    model_path: Path


@dataclass(frozen=True, slots=True)
class Check:
    key: str
    ok: bool
    problem: str = ""


class ModelStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def manifests(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return sorted(self.root.glob(f"*{MANIFEST_SUFFIX}"))

    def installed(self) -> list[Installed]:
        """Every parseable manifest (invalid ones show up in ``verify``)."""
        out = []
        for path in self.manifests():
            try:
                manifest = load_manifest(path)
            except ValueError:
                continue
            out.append(Installed(manifest, path, self.root / manifest.file))
        return out

    def verify(self) -> list[Check]:
        checks = []
        for path in self.manifests():
            key = path.name.removesuffix(MANIFEST_SUFFIX)
            try:
                manifest = load_manifest(path)
            except ValueError as exc:
                checks.append(Check(key, False, str(exc)))
                continue
            checks.append(_check_file(manifest, self.root / manifest.file))
        return checks

    def get(self, name: str, version: str | None = None) -> Installed:
        """The installed model ``name`` (the highest version unless one is given),
        verified against its sha256; raises LookupError or ValueError."""
        matches = [
            i
            for i in self.installed()
            if i.manifest.name == name and (version is None or i.manifest.version == version)
        ]
        if not matches:
            raise LookupError(f"model {name!r} is not installed in {self.root}")
        found = max(matches, key=lambda i: _version_key(i.manifest.version))
        check = _check_file(found.manifest, found.model_path)
        if not check.ok:
            raise ValueError(f"model {found.manifest.key}: {check.problem}")
        return found

    def install(self, source: Path, manifest_path: Path | None = None) -> Installed:
        """Copy a local model into the store. ``source`` is the .onnx file; its
        manifest is ``manifest_path`` or the ``*.manifest.json`` beside it whose
        ``file`` names it."""
        source = source.resolve()
        manifest_path = manifest_path or _find_manifest(source)
        manifest = load_manifest(manifest_path)
        check = _check_file(manifest, source)
        if not check.ok:
            raise ValueError(f"refusing to install {source}: {check.problem}")
        self.root.mkdir(parents=True, exist_ok=True)
        target = self.root / manifest.file
        _atomic_copy(source, target)
        installed_check = _check_file(manifest, target)
        if not installed_check.ok:
            target.unlink(missing_ok=True)
            raise ValueError(f"copy of {source} is corrupt: {installed_check.problem}")
        target_manifest = manifest_path_for(self.root, manifest.key)
        tmp = target_manifest.with_suffix(".tmp")
        dump_manifest(manifest, tmp)
        tmp.replace(target_manifest)
        return Installed(manifest, target_manifest, target)

    def add_built(self, model_bytes: bytes, manifest: ModelManifest) -> Installed:
        """Store a model built on this machine (the fixture builders); the manifest's
        sha256 must match the bytes."""
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / manifest.file
            src.write_bytes(model_bytes)
            mpath = Path(tmp) / f"{manifest.key}{MANIFEST_SUFFIX}"
            dump_manifest(manifest, mpath)
            return self.install(src, mpath)


def _check_file(manifest: ModelManifest, path: Path) -> Check:
    if not path.is_file():
        return Check(manifest.key, False, f"model file {path.name} is missing")
    actual = sha256_file(path)
    if actual != manifest.sha256:
        return Check(
            manifest.key,
            False,
            f"sha256 mismatch for {path.name}: manifest {manifest.sha256[:12]}…, "
            f"file {actual[:12]}…",
        )
    return Check(manifest.key, True)


def _find_manifest(source: Path) -> Path:
    for candidate in sorted(source.parent.glob(f"*{MANIFEST_SUFFIX}")):
        try:
            if load_manifest(candidate).file == source.name:
                return candidate
        except ValueError:
            continue
    raise ValueError(f"no manifest beside {source} names it (pass --manifest)")


def _atomic_copy(source: Path, target: Path) -> None:
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        shutil.copyfile(source, tmp)
        tmp.replace(target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _version_key(version: str) -> tuple[tuple[int, str], ...]:
    parts = version.replace("-", ".").replace("+", ".").split(".")
    return tuple((int(p), "") if p.isdigit() else (-1, p) for p in parts)
