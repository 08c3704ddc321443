"""The Kokoro-82M spoof generator: espeak-ng IPA folded into Kokoro's phoneme symbols,
the model reassembled from its PyPI part wheels (checked), real synthesis in English and
Spanish, and a split that keeps the dev and test voices out of training."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from detectors.synthetic import generators, kokoro


def test_fold_and_tokens() -> None:
    ipa = "həlˈoʊ ðˈɛɹ\nmaɪ nˈeɪm ɪz dʒˈoʊ tʃˈaʊ\n"
    folded = kokoro.fold(ipa)
    assert folded == "həlˈO ðˈɛɹ, mI nˈAm ɪz ʤˈO ʧˈW."
    vocab, _ = kokoro.assets()
    ids = kokoro.tokens(folded + "☃", vocab)
    assert len(ids) == len(folded)  # every folded symbol is known; the snowman is dropped
    assert ids[:3] == [vocab["h"], vocab["ə"], vocab["l"]]
    assert kokoro.tokens("a" * 2000, vocab) == [vocab["a"]] * kokoro.MAX_TOKENS
    assert kokoro.fold("\n \n") == ""


def test_voice_names() -> None:
    assert kokoro.split_voice("jf_alpha:es-419") == ("jf_alpha", "es-419")
    for bad in ("jf_alpha", ":en-us", "jf_alpha:"):
        with pytest.raises(kokoro.KokoroError):
            kokoro.split_voice(bad)
    _, styles = kokoro.assets()
    for s in generators.SYSTEMS:
        if s.family == "kokoro":  # a style, or a blend of styles
            assert set(kokoro.split_voice(s.voice)[0].split("+")) <= set(styles), s.id


def test_a_blend_is_the_mean_of_its_styles() -> None:
    _, styles = kokoro.assets()
    one = kokoro.style_table("jm_kumo", styles)
    assert np.array_equal(one, styles["jm_kumo"])
    two = kokoro.style_table("jf_alpha+jm_kumo", styles)
    assert two.shape == one.shape and two.dtype == np.float32
    np.testing.assert_allclose(two, (styles["jf_alpha"] + styles["jm_kumo"]) / 2, atol=1e-6)
    assert not np.allclose(two, styles["jf_alpha"]) and not np.allclose(two, one)
    with pytest.raises(kokoro.KokoroError, match="once"):
        kokoro.style_table("jm_kumo+jm_kumo", styles)
    with pytest.raises(kokoro.KokoroError, match="no kokoro style 'af_heart'"):
        kokoro.style_table("jm_kumo+af_heart", styles)


def test_dev_and_test_voices_are_never_trained_on() -> None:
    """Not alone, and not in a blend either."""
    styles: dict[str, set[str]] = {"train": set(), "dev": set(), "test": set()}
    for s in generators.SYSTEMS:
        if s.family == "kokoro":
            for p in s.parts:
                styles[p] |= set(kokoro.split_voice(s.voice)[0].split("+"))
    assert styles["train"] and styles["dev"] and styles["test"]
    assert not styles["train"] & (styles["dev"] | styles["test"])
    assert not styles["dev"] & styles["test"]


def test_model_parts_reassemble_and_verify() -> None:
    blob = kokoro.model_bytes()
    assert len(blob) > 50_000_000  # the int8 Kokoro-82M graph


def test_synthesis_english_and_spanish() -> None:
    espeak = shutil.which("espeak-ng")
    assert espeak is not None
    short, rate = kokoro.synthesize("Hello.", "jm_kumo:en-us", 1.0, espeak)
    longer, _ = kokoro.synthesize(
        "Hello, this is your bank calling about your card.", "jm_kumo:en-us", 1.0, espeak
    )
    assert rate == kokoro.RATE
    assert len(longer) > 2 * len(short) and len(longer) / rate > 1.5
    assert np.abs(longer).max() == pytest.approx(0.9, abs=1e-3)
    es, _ = kokoro.synthesize("Buenos días, ¿cómo está usted?", "jf_gongitsune:es-419", 1.1, espeak)
    assert len(es) / rate > 1.0 and float(np.sqrt(np.mean(es**2))) > 0.02
    with pytest.raises(kokoro.KokoroError, match="no kokoro style"):
        kokoro.synthesize("Hello.", "af_heart:en-us", 1.0, espeak)


def test_kokoro_training_voices_are_opt_in() -> None:
    default = generators.selected()
    assert all(not (s.family == "kokoro" and "train" in s.parts) for s in default)
    kokoro_default = {p for s in default if s.family == "kokoro" for p in s.parts}
    assert kokoro_default == {"dev", "test"}  # dev always holds a neural TTS never trained on
    every_opt_in = generators.selected(generators.OPT_IN_TRAINING)
    assert {s.id for s in every_opt_in} == {s.id for s in generators.SYSTEMS}
    everything = generators.selected(("kokoro", "kokoro-blends"))
    assert {s.family for s in every_opt_in} - {s.family for s in everything} == {"neuralvoc"}
    assert {s.id for s in default} < {s.id for s in everything}
    # the blends are a set of their own: `kokoro` alone brings the five-style voices only
    plain = {s.id for s in generators.selected(("kokoro",))}
    blends = {s.id for s in everything} - plain
    assert len(blends) == 4 and all("+" in s.voice for s in everything if s.id in blends)
    assert all(s.family == "kokoro" and s.parts == ("train",) for s in everything if s.id in blends)
    only_blends = {s.id for s in generators.selected(("kokoro-blends",))}
    assert only_blends == {s.id for s in default} | blends  # the five-style voices stay out
    with pytest.raises(ValueError, match="opt-in"):
        generators.selected(("espeak",))


def test_the_cli_default_recipe_is_aasist_lite_with_the_kokoro_voices() -> None:
    """train-synthetic's default recipe (since 2026-12-02): AASIST-lite trained with the
    Kokoro voices; ``--with-family none`` is the recipe before, ``--arch cnn`` the CNN."""
    import argparse

    from detectors import models_cli

    parser = argparse.ArgumentParser()
    models_cli.add_parser(parser.add_subparsers(dest="cmd"), "models")
    args = parser.parse_args(["models", "train-synthetic"])
    assert args.arch == "aasist-lite"
    assert models_cli.training_families(args.with_family) == ("kokoro",)
    args = parser.parse_args(["models", "train-synthetic", "--with-family", "none"])
    assert models_cli.training_families(args.with_family) == ()
    args = parser.parse_args(["models", "train-synthetic", "--with-family", "kokoro"])
    assert models_cli.training_families(args.with_family) == ("kokoro",)
    with pytest.raises(ValueError, match="none cannot be combined"):
        models_cli.training_families(["none", "kokoro"])
    args = parser.parse_args(
        ["models", "train-synthetic", "--with-family", "kokoro", "--with-family", "kokoro-blends"]
    )
    assert models_cli.training_families(args.with_family) == ("kokoro", "kokoro-blends")
    # the families reach the generator selection as the build uses them
    chosen = generators.selected(models_cli.training_families(None))
    assert any(s.family == "kokoro" and "train" in s.parts for s in chosen)
