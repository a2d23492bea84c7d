"""Random argument lists for every subcommand, mixing its own options with good and bad values, unknown options
and stray words: the command returns a status or exits (argparse, usage errors), never raises anything else, and a
refusal is one line on stderr with status 2 and nothing on stdout."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_cases import BAD_VALUES, PROG, SERVERS, SMALL_GOOD, SMALL_PREFIX, fill, invoke, paths
from trtllm_replayssm.cli import build_parser

COMMANDS = build_parser().commands
WHERE = None  # placeholder paths, made once per module (hypothesis runs many examples per test call)
OUTCOMES = {}  # command -> {status: count}: the test checks that both valid runs and refusals were drawn


@pytest.fixture(scope="module", autouse=True)
def _paths(tmp_path_factory):
    global WHERE
    WHERE = paths(tmp_path_factory.mktemp("cli_properties"))


def _options(command):
    """(flag, takes a value) of every option of a subcommand, from its parser."""
    return [(s, action.nargs != 0) for action in COMMANDS[command]._actions for s in action.option_strings
            if s.startswith("--") and s != "--help"]


@st.composite
def argument_lists(draw, command):
    """Half of the lists hold good values only (valid runs, small), the other half mix in bad values, unknown
    options and stray words."""
    options = _options(command)
    valid = draw(st.booleans())
    argv = [command] + SMALL_PREFIX.get(command, [])
    for _ in range(draw(st.integers(0, 5))):
        kinds = ["option"] if valid else ["option", "option", "option", "unknown", "word"]
        kind = draw(st.sampled_from(kinds if options else ["unknown", "word"]))
        if kind == "unknown":
            argv.append(draw(st.sampled_from(["--nosuch", "-x", "--steps=", "--batch=2x"])))
            continue
        if kind == "word":
            argv.append(draw(st.sampled_from(BAD_VALUES)))
            continue
        flag, takes_value = draw(st.sampled_from(options))
        good = SMALL_GOOD.get(flag, [])
        if takes_value and valid and not good:
            continue  # an option without small good values (--png) only appears with bad ones
        argv.append(flag)
        if takes_value:
            use_good = good and (valid or draw(st.booleans()))
            argv.append(draw(st.sampled_from(good if use_good else BAD_VALUES)))
    return argv


def _check(argv):
    code, out, err = invoke(fill(argv, WHERE))  # an exception other than SystemExit fails the test here
    assert isinstance(code, int) and code in (0, 1, 2), (argv, code, err)
    OUTCOMES.setdefault(argv[0], {}).setdefault(code, 0)
    OUTCOMES[argv[0]][code] += 1
    assert "Traceback" not in err, (argv, err)
    if code == 2:
        assert out == "", (argv, out)
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"{PROG} {argv[0]}: error: "), (argv, err)
    if code == 0:
        assert err == "", (argv, err)  # stderr is not a terminal here: no progress bar


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_random_arguments_never_raise(command):
    @settings(max_examples=200, deadline=30_000, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
    @given(argument_lists(command))
    def check(argv):
        _check(argv)

    check()
    # Both valid runs and refusals were drawn (servers: refusals only, SMALL_PREFIX)
    assert ({2} if command in SERVERS else {0, 2}) <= set(OUTCOMES[command]), OUTCOMES[command]
