"""The convert / calibrate / account subcommands: outputs, JSON keys and every error path."""

import json
import subprocess
import sys

import pytest

from privzv import gdp
from privzv.cli import main

RELEASE = [
    "--delta",
    "1e-5",
    "--steps",
    "100",
    "--dataset-size",
    "1000",
    "--batch-size",
    "100",
    "--clip",
    "1",
]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv):
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_convert_gives_the_third_value(capsys):
    mu = run_json(capsys, "convert", "--epsilon", "1", "--delta", "1e-5")["mu"]
    assert mu == pytest.approx(gdp.mu_from_epsilon(1.0, 1e-5), rel=1e-12)
    eps = run_json(capsys, "convert", "--mu", str(mu), "--delta", "1e-5")
    assert eps["epsilon"] == pytest.approx(1.0, rel=1e-8) and eps["delta"] == 1e-5
    delta = run_json(capsys, "convert", "--mu", str(mu), "--epsilon", "1")["delta"]
    assert delta == pytest.approx(1e-5, rel=1e-8)
    code, out, _ = run(capsys, "convert", "--mu", "0.5", "--epsilon", "1")
    assert code == 0 and "delta =" in out


@pytest.mark.parametrize(
    "command, flag", [("calibrate", ["--epsilon", "1"]), ("account", ["--sigma", "0.05"])]
)
def test_release_commands_print_the_contract_keys(capsys, command, flag):
    obj = run_json(capsys, command, *flag, *RELEASE)
    assert {"sigma", "noise_multiplier", "epsilon", "delta", "accountant", "threat"} <= set(obj)
    assert obj["accountant"] == "pld" and obj["threat"] == "device" and obj["rigorous"]
    code, out, _ = run(capsys, command, *flag, *RELEASE, "--accountant", "seed")
    (line,) = [x for x in out.splitlines() if x.startswith("epsilon")]
    assert code == 0 and line.endswith("NOT RIGOROUS")  # beside the figure it qualifies


def test_calibrate_then_account_roundtrip(capsys):
    cal = run_json(
        capsys,
        "calibrate",
        "--epsilon",
        "1",
        *RELEASE,
        "--threat",
        "eavesdropper",
        "--neighbors",
        "add-remove",
        "--accountant",
        "rdp",
    )
    acc = run_json(
        capsys,
        "account",
        "--sigma",
        repr(cal["sigma"]),
        *RELEASE,
        "--threat",
        "eavesdropper",
        "--neighbors",
        "add-remove",
        "--accountant",
        "rdp",
    )
    assert acc["epsilon"] <= 1.0 and acc["epsilon"] == pytest.approx(cal["epsilon"], rel=1e-8)


def test_all_lists_every_threat_and_shows_the_gap(capsys):
    obj = run_json(capsys, "account", "--sigma", "0.05", *RELEASE, "--all")
    threats = {r["threat"] for r in obj["results"] if r["accountant"] != "seed"}
    assert threats == {"device", "eavesdropper"}
    obj = run_json(capsys, "calibrate", "--epsilon", "1", *RELEASE, "--all", "--super-batch", "400")
    assert "secret-subsampling" in {r["threat"] for r in obj["results"]}
    code, out, _ = run(capsys, "calibrate", "--epsilon", "1", *RELEASE, "--all")
    assert code == 0 and "sigma / seed" in out
    rows = {tuple(line.split()[:2]): line for line in out.splitlines()[2:-1]}
    # every figure that is not an upper bound is marked in its own row: the seed's and the
    # central-limit gdp-clt with sampling (issue 19); gdp-clt without sampling is exact
    for key in (("(any:", "ignored)"), ("eavesdropper", "gdp-clt")):
        assert "NOT RIGOROUS" in rows[key], rows[key]
    for key in (("device", "gdp-clt"), ("device", "pld"), ("eavesdropper", "pld")):
        assert "upper bound" in rows[key], rows[key]


def test_all_answers_the_rows_it_can_and_says_why_not_for_the_others(capsys):
    """At sigma 1e-6 the gdp-clt eavesdropper epsilon overflows; that row says why
    (no Infinity token, exit code 0) and every other row still prints its epsilon."""
    argv = [
        "account",
        "--sigma",
        "1e-6",
        "--delta",
        "1e-5",
        "--steps",
        "1000",
        "--dataset-size",
        "60000",
        "--batch-size",
        "256",
        "--clip",
        "1",
        "--all",
    ]
    obj = run_json(capsys, *argv)
    missing = [r for r in obj["results"] if r["accountant"] is None]
    answered = [r for r in obj["results"] if r["accountant"] is not None]
    assert [(r["threat"], r["requested"]) for r in missing] == [("eavesdropper", "gdp-clt")]
    assert missing[0]["reason"].startswith("no answer: ") and not missing[0]["answered"]
    assert "floating-point range" in missing[0]["reason"]
    assert len(answered) == 6 and all(r["epsilon"] > 1e5 for r in answered)
    code, out, err = run(capsys, *argv)
    assert code == 0 and not err and "no answer: " in out and "device" in out
    # an unreachable target: calibrate says so in its rows and answers the others
    obj = run_json(capsys, "calibrate", "--epsilon", "1e-14", "--delta", "1e-300", *RELEASE[2:], "--all")
    reasons = {(r["threat"], r["requested"]): r["reason"] for r in obj["results"] if r["accountant"] is None}
    assert reasons and all("unreachable" in why for why in reasons.values())
    assert any(r["accountant"] is not None for r in obj["results"])
    # bad input is still exit code 2
    code, _, err = run(capsys, *argv[:4], "2", *argv[5:])
    assert code == 2 and "--delta '2'" in err


def test_the_one_strict_json_reader_names_the_file_and_the_problem(tmp_path):
    """cliutil.read_json serves --config and the run folder: one line naming the file."""
    from privzv.cliutil import read_json
    from privzv.errors import PrivzvError

    good = tmp_path / "good.json"
    good.write_text('{"a": [1, 2.5, null]}')
    assert read_json(good, "x") == {"a": [1, 2.5, None]}
    cases = [
        (tmp_path / "absent.json", None, "no such file"),
        (tmp_path, None, "is a directory"),
        (good, 5, "larger than 5 bytes"),
    ]
    for name, content, why in [
        ("nan.json", '{"a": NaN}', "NaN is not a JSON number"),
        ("inf.json", "[Infinity]", "Infinity is not a JSON number"),
        ("bad.json", "{not json", "not JSON (Expecting"),
        ("bin.json", b"\xff\xfe", "not a UTF-8 text file"),
    ]:
        path = tmp_path / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        cases.append((path, None, why))
    for path, limit, why in cases:
        with pytest.raises(PrivzvError) as info:
            read_json(path, f"--thing {path.name}", max_bytes=limit)
        message = str(info.value)
        assert message.startswith(f"--thing {path.name}: ") and why in message
        assert len(message.splitlines()) == 1


BAD = [
    (["convert", "--epsilon", "1"], "exactly two"),
    (["convert", "--mu", "1", "--epsilon", "1", "--delta", "1e-5"], "exactly two"),
    (["convert", "--mu", "0", "--delta", "1e-5"], "--mu '0'"),
    (["convert", "--mu", "-1", "--delta", "1e-5"], "--mu '-1'"),
    (["convert", "--epsilon", "-1", "--delta", "1e-5"], "--epsilon '-1'"),
    (["convert", "--epsilon", "1", "--delta", "0"], "--delta '0'"),
    (["convert", "--epsilon", "1", "--delta", "1"], "--delta '1'"),
    (["convert", "--epsilon", "1", "--delta", "1.5"], "--delta '1.5'"),
    (["convert", "--epsilon", "one", "--delta", "1e-5"], "--epsilon 'one'"),
    (["convert", "--epsilon", "nan", "--delta", "1e-5"], "--epsilon 'nan'"),
    (["calibrate", "--epsilon", "-1", *RELEASE], "--epsilon '-1'"),
    (["calibrate", "--epsilon", "0", *RELEASE], "--epsilon '0'"),
    (["calibrate", "--epsilon", "inf", *RELEASE], "--epsilon 'inf'"),
    (["calibrate", "--epsilon", "1", *RELEASE, "--steps", "0"], "--steps '0'"),
    (["calibrate", "--epsilon", "1", *RELEASE, "--steps", "2.5"], "--steps '2.5'"),
    (["calibrate", "--epsilon", "1", *RELEASE, "--batch-size", "1001"], "--batch-size 1001"),
    (["calibrate", "--epsilon", "1", *RELEASE, "--clip", "0"], "--clip '0'"),
    (["calibrate", "--epsilon", "1", *RELEASE, "--clip", "x"], "--clip 'x'"),
    (["calibrate", "--epsilon", "1", *RELEASE, "--devices", "0"], "--devices '0'"),
    (["calibrate", "--epsilon", "1", *RELEASE, "--dataset-size", "-5"], "--dataset-size '-5'"),
    (
        ["calibrate", "--epsilon", "1", *RELEASE, "--threat", "secret-subsampling", "--super-batch", "50"],
        "--super-batch 50",
    ),
    (
        ["calibrate", "--epsilon", "1", *RELEASE, "--threat", "secret-subsampling", "--super-batch", "2000"],
        "--super-batch 2000",
    ),
    (["calibrate", "--epsilon", "1", *RELEASE, "--threat", "secret-subsampling"], "needs --super-batch"),
    (["calibrate", "--epsilon", "1", *RELEASE, "--super-batch", "200"], "only used with"),
    (["calibrate", "--epsilon", "1", *RELEASE, "--threat", "server"], "'server'"),
    (["calibrate", "--epsilon", "1", *RELEASE, "--accountant", "moments"], "'moments'"),
    (["calibrate", "--epsilon", "1", *RELEASE, "--neighbors", "swap"], "'swap'"),
    (["calibrate", *RELEASE], "--epsilon"),
    (
        ["calibrate", "--epsilon", "1e-14", *RELEASE[:1], "1e-300", *RELEASE[2:], "--threat", "eavesdropper"],
        "unreachable",
    ),
    (["account", "--sigma", "0", *RELEASE], "--sigma '0'"),
    (["account", "--sigma", "abc", *RELEASE], "--sigma 'abc'"),
    (["account", *RELEASE], "--sigma"),
    (["frobnicate"], "'frobnicate'"),
]


@pytest.mark.parametrize("argv, named", BAD, ids=[" ".join(a[:4]) + "|" + n for a, n in BAD])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, named):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.startswith("privzv: error: ") and err.count("\n") == 1
    assert named in err and "Traceback" not in err


def test_console_entry_point_exit_code_and_no_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "privzv", "convert", "--delta", "2", "--epsilon", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "privzv: error: --delta '2': must be a finite number > 0 and < 1"
    ]


def test_head_options_calibrate_the_whole_round_and_show_both_sigmas(capsys):
    from privzv.accounting import calibrate
    from privzv.release import HeadUpdate, Release, Schedule

    flags = [
        "--head-clip",
        "0.5",
        "--head-share",
        "0.8",
        "--devices",
        "2",
        "--device-steps",
        "70,30",
        "--accountant",
        "pld",
    ]
    obj = run_json(capsys, "calibrate", "--epsilon", "1", *RELEASE, *flags)
    release = Release(clip=1.0, batch_size=100, head=HeadUpdate(clip=0.5, batch_size=100), head_share=0.8)
    schedule = Schedule(steps=100, dataset_size=1000, devices=2, device_steps=(70, 30))
    expected = calibrate(1.0, 1e-5, release, schedule, "pld")
    assert obj["compositions"] == 7 + 3  # ceil(70/10) + ceil(30/10)
    assert obj["sigma"] == expected.sigma and obj["head_sigma"] == expected.head_sigma
    # z_h = z / sqrt(0.8): sigma_h = z_h * 2 C_h / B
    assert obj["head_sigma"] == pytest.approx(obj["noise_multiplier"] / 0.8**0.5 * 2 * 0.5 / 100, rel=1e-12)
    acc = run_json(capsys, "account", "--sigma", repr(obj["sigma"]), *RELEASE, *flags)
    assert acc["head_sigma"] == pytest.approx(obj["head_sigma"], rel=1e-12)
    assert acc["epsilon"] == pytest.approx(obj["epsilon"], rel=1e-9) and acc["epsilon"] <= 1
    code, out, _ = run(capsys, "calibrate", "--epsilon", "1", *RELEASE, *flags)
    assert code == 0 and "head sigma" in out and "downlink and head combined" in out
    code, out, _ = run(capsys, "account", "--sigma", "0.1", *RELEASE, *flags, "--all")
    assert code == 0 and "head sigma" in out.splitlines()[0]


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--device-steps", "50,40", "--devices", "2"], "summing to --steps 100"),
        (["--device-steps", "90"], "summing to --steps 100"),
        (["--device-steps", "100", "--devices", "2"], "--devices 2"),
        (["--device-steps", "a,b"], "--device-steps 'a,b'"),
        (["--device-steps", "110,-10", "--devices", "2"], "--device-steps '110,-10'"),
        (["--head-clip", "0"], "--head-clip '0'"),
        (["--head-clip", "1", "--head-share", "1"], "--head-share '1'"),
    ],
)
def test_bad_round_options_are_one_line_and_exit_2(capsys, flags, named):
    code, out, err = run(capsys, "calibrate", "--epsilon", "1", *RELEASE, *flags)
    assert code == 2 and out == "" and named in err and err.count("\n") == 1
