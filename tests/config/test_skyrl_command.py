"""Values we render read back as the same values through OmegaConf's CLI parser (what SkyRL uses)."""

import shlex

import pytest
from omegaconf import OmegaConf

from beam_slurm.config.skyrl_command import SkyRLLaunch, reads_back, render_value


@pytest.mark.parametrize("value", [
    "plain", "/path/with spaces/x", "null", "true", "123", "1e-5", "a: b", "it's", 'quote"d', "#hash", "[x]",
    True, False, None, 0, 7, 1e-05, 0.99, ["/a b/c.parquet", "/d.parquet"], {"reasoning_effort": "minimal"},
    "/m/${x}", "/m/\\${x}", "/m/\\\\${x}\\", "${", "a\nb${c}", ["/d/${x}/a.parquet"], {"k": "${v}"},
])
def test_render_round_trips_through_omegaconf_cli(value):
    # resolve=True: SkyRL resolves references, so `${` must arrive escaped to stay text
    parsed = OmegaConf.to_container(OmegaConf.from_cli([f"k={render_value(value)}"]), resolve=True)["k"]
    assert parsed == value
    assert reads_back(value)


def test_shell_line_quotes_every_value():
    launch = SkyRLLaunch("m", ["a=x y", "b=$(touch /tmp/pwned)"], {"E": "v w"}, cwd="/dir with space")
    tokens = shlex.split(launch.shell())
    assert tokens[:2] == ["cd", "/dir with space"]
    assert "a=x y" in tokens and "b=$(touch /tmp/pwned)" in tokens and "E=v w" in tokens
