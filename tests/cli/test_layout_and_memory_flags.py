"""The command line's block-layout flags (rules in core.blockmask.LayoutRequest) and the note on
where --M came from (common.memory_note, derived when an error names --M, never stored in the
parsed arguments): the exact lines."""

from __future__ import annotations

import pytest

from attnio.cli import build_parser, main
from attnio.cli.common import memory_from_args, memory_note

BASE = ["plan", "--N", "4096", "--d", "64", "--M", "65536"]


@pytest.mark.parametrize("extra,line", [
    (["--block-size", "64"],
     "--block-size applies to a block layout: add --density S or --block-mask FILE.npy"),
    (["--density", "0.5", "--causal"],
     "--density cannot be combined with --causal/--window: the block layout is the mask"),
    (["--density", "0.5", "--block-mask", "x.npy"],
     "--block-mask: give --block-mask FILE.npy or --density S, not both"),
    (["--density", "0.5", "--block-size", "1"],
     "--block-size: --density: a layout of 16,777,216 blocks of 1x1 is more than 1,048,576; "
     "raise --block-size"),
], ids=["block-size-alone", "masked", "both", "too-many"])
def test_layout_errors_are_one_line_in_flags(extra, line, capsys):
    assert main(BASE + extra) == 2
    assert capsys.readouterr().err == f"attnio plan: error: {line}\n"


TOO_BIG = ["run", "flash2", "--N", "4096", "--d", "64", "--count-only", "--tiling",
           '{"Br": 100000, "Bc": 64}']


@pytest.mark.parametrize("memory,tail", [
    (["--device", "h100"], "--M=116224 (--M here: 116,224 words from --device h100-sxm)"),
    (["--M-bytes", "100000", "--dtype", "fp16"],
     "--M=50000 (--M here: 50,000 words from --M-bytes 100000)"),
    (["--M", "50000"], "--M=50000"),
], ids=["device", "bytes", "words"])
def test_an_error_naming_M_says_where_M_came_from(memory, tail, capsys):
    assert main(TOO_BIG + memory) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnio run: error: --M: flash2 with tiling Flash2Tiling(Br=100000")
    assert err.endswith(f"words of fast memory, more than {tail}\n")
    assert err.count("\n") == 1


def test_memory_flags_leave_the_parsed_arguments_as_they_were():
    args = build_parser().parse_args(["plan", "--N", "64", "--d", "8", "--device", "h100"])
    before = dict(vars(args))
    assert memory_from_args(args).M == 116224
    assert memory_note(args) == "--M here: 116,224 words from --device h100-sxm"
    assert vars(args) == before
    args = build_parser().parse_args(["plan", "--N", "64", "--d", "8", "--M", "100"])
    assert memory_note(args) is None
