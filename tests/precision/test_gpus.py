"""Target GPUs: compute capability and names -> formats; refusals are one ConfigError."""

from __future__ import annotations

import pytest

from quantkit.errors import ConfigError
from quantkit.precision.gpus import check_formats, formats_for, resolve_gpu


@pytest.mark.parametrize("value,sm,arch", [(75, 75, "turing"), ("86", 86, "ampere"),
                                           ("8.9", 89, "ada"), ("h200", 90, "hopper"),
                                           ("Orin", 87, "ampere"), ("B200", 100, "blackwell"),
                                           (120, 120, "blackwell"), ("L40S", 89, "ada")])
def test_resolve_gpu(value, sm, arch):
    g = resolve_gpu(value)
    assert (g.sm, g.arch) == (sm, arch)


@pytest.mark.parametrize("sm,formats", [(75, ("int8",)), (80, ("int8",)), (87, ("int8",)),
                                        (89, ("int8", "fp8")), (90, ("int8", "fp8")),
                                        (100, ("int8", "fp8"))])
def test_formats_per_sm(sm, formats):
    assert formats_for(resolve_gpu(sm)) == formats


def test_check_formats_accepts_and_refuses_naming_target_and_format():
    assert check_formats("H100", ["int8", "fp8", "int8"]) == ("int8", "fp8")
    assert check_formats(None, ["int8"]) == ("int8",)
    with pytest.raises(ConfigError) as e:
        check_formats(86, ["int8", "fp8"])
    msg = str(e.value)
    assert "sm 86" in msg and "fp8" in msg and "\n" not in msg
    with pytest.raises(ConfigError, match="gpu.sm"):
        check_formats(None, ["fp8"])
    with pytest.raises(ConfigError, match="unknown quantized format"):
        check_formats(90, ["int4"])


@pytest.mark.parametrize("bad", ["V100", 70, "abc", 61])
def test_unknown_targets_are_refused(bad):
    with pytest.raises(ConfigError):
        resolve_gpu(bad)


def test_record_target_note_names_gpu_and_formats_only_when_set():
    from quantkit.run.identity import target_note
    from quantkit.settings import Settings

    s = Settings()
    before = target_note(s)
    assert "GPU" not in before  # unset: the note reads as it always did
    s.gpu.sm = "H200"
    s.precision.formats = ["int8", "fp8"]
    note = target_note(s)
    assert note.startswith(before) and "H200 (sm 90)" in note and "int8, fp8" in note
