"""core.blockmask's LayoutRequest: the rules of a block layout asked for (a file or a density),
each refusal naming its parameter, worded in API names and, through the command line's flags
table, in the flags (the CLI's own lines: tests/cli/test_layout_and_memory_flags.py)."""

from __future__ import annotations

import numpy as np
import pytest

from attnio.cli.common import FLAGS
from attnio.core import BlockMask, LayoutRequest, ParameterError, default_block_size
from attnio.core.blockmask import MAX_LAYOUT_BLOCKS


def test_no_layout_asked_for_is_none():
    assert LayoutRequest().block_mask(256, 256, d=16, M=1024) is None


def test_a_density_draws_a_random_layout_of_the_default_block_size():
    bm = LayoutRequest(density=0.5, layout_seed=3).block_mask(4096, 4096, d=64, M=65536)
    b = default_block_size(4096, 4096, 64, 65536)
    assert bm == BlockMask.random(4096, 4096, b, b, density=0.5, seed=3)
    assert (bm.bq, bm.bk) == (256, 256)
    assert LayoutRequest(density=0.5, block_size=64).block_mask(
        4096, 4096, d=64, M=65536) == BlockMask.random(4096, 4096, 64, 64, density=0.5, seed=0)


def test_a_file_gives_its_layout(tmp_path):
    path = tmp_path / "layout.npy"
    np.save(path, np.tril(np.ones((4, 4), bool)))
    bm = LayoutRequest(path=path).block_mask(256, 256, d=16, M=1024)
    assert (bm.bq, bm.bk, bm.kept) == (64, 64, 10)


def _flags(e: ParameterError) -> str:
    return e.render(FLAGS.get)


@pytest.mark.parametrize("request_,masked,param,api,flags", [
    (LayoutRequest(block_size=64), False, "block_size",
     "block_size applies to a block layout: add density S or block_mask FILE.npy",
     "--block-size applies to a block layout: add --density S or --block-mask FILE.npy"),
    (LayoutRequest(layout_seed=1), False, "layout_seed",
     "layout_seed applies to a block layout: add density S or block_mask FILE.npy",
     "--layout-seed applies to a block layout: add --density S or --block-mask FILE.npy"),
    (LayoutRequest(path="x.npy", density=0.5), False, "block_mask",
     "give block_mask FILE.npy or density S, not both",
     "give --block-mask FILE.npy or --density S, not both"),
    (LayoutRequest(density=0.5), True, "density",
     "density cannot be combined with causal/window: the block layout is the mask",
     "--density cannot be combined with --causal/--window: the block layout is the mask"),
    (LayoutRequest(path="x.npy", layout_seed=2), False, "layout_seed",
     "layout_seed applies to a density layout", "--layout-seed applies to a --density layout"),
    (LayoutRequest(density=0.5, block_size=1), False, "block_size",
     f"density: a layout of 16,777,216 blocks of 1x1 is more than {MAX_LAYOUT_BLOCKS:,}; raise "
     "block_size",
     f"--density: a layout of 16,777,216 blocks of 1x1 is more than {MAX_LAYOUT_BLOCKS:,}; "
     "raise --block-size"),
], ids=["block-size-alone", "seed-alone", "both", "masked", "seed-with-file", "too-many"])
def test_refusals_name_their_parameter(request_, masked, param, api, flags):
    with pytest.raises(ParameterError) as e:
        request_.block_mask(4096, 4096, d=64, M=65536, masked=masked)
    assert e.value.param == param
    assert str(e.value) == api
    assert _flags(e.value) == flags


def test_file_refusals_name_the_file(tmp_path):
    path = tmp_path / "layout.npy"
    np.save(path, np.ones((4, 2), bool))
    with pytest.raises(ParameterError) as e:
        LayoutRequest(path=path).block_mask(4096, 4096, d=64, M=65536)
    assert e.value.param == "block_mask"
    assert _flags(e.value).startswith(f"--block-mask {path}: a 4x2 layout for Nq=4096")
    assert _flags(e.value).endswith("needs 4x4 blocks (or give --block-size)")
    with pytest.raises(ParameterError) as e:
        LayoutRequest(path=tmp_path / "missing.npy").block_mask(256, 256, d=16, M=1024)
    assert e.value.param == "block_mask" and "does not exist" in str(e.value)
