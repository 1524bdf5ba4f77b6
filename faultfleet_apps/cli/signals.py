"""``faultfleet signals ...``: simulate, inspect and federate vibration recordings."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from faultfleet_apps.cli.arguments import (
    FINITE_NUMBER,
    GROUPS_HELP,
    MACHINE_SPREAD_HELP,
    NON_NEGATIVE_NUMBER,
    POSITIVE,
    POSITIVE_NUMBER,
    SEED,
    check_fleet_options,
    label_groups_option,
    output_file_folder,
    whole,
)
from faultfleet_apps.progress import Progress
from signal_pipeline.bearing import parse_bearing
from signal_pipeline.conditions import Condition, label_names
from signal_pipeline.federation import Federation
from signal_pipeline.inspection import Inspection, inspect_recording
from signal_pipeline.label_groups import label_groups
from signal_pipeline.machine import MachineProfile
from signal_pipeline.plant_federation import manifest_federation
from signal_pipeline.readers import SUPPORTED_SUFFIXES, read_recording, write_recording
from signal_pipeline.scenarios import ProgressCallback, VibrationSettings, mixed_fault
from signal_pipeline.simulator import DEFAULT_FS_HZ, DEFAULT_SNR_DB, simulate

Subparsers = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _band(text: str) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"band must be LOW,HIGH in Hz, got {text!r}") from None
    if not (math.isfinite(high) and 0 < low < high):
        raise argparse.ArgumentTypeError(
            f"band must be LOW,HIGH in Hz with 0 < LOW < HIGH, got {text!r}"
        )
    return (low, high)


def _channel(text: str) -> str | int:
    return int(text) if text.isdigit() else text


def add_signals_commands(commands: Any) -> None:
    """Register ``signals simulate``, ``signals inspect`` and ``signals federation``."""
    signals = commands.add_parser(
        "signals",
        help="simulate, inspect and federate vibration signals",
        description="Simulate, inspect and federate vibration signals.",
    )
    sub = signals.add_subparsers(dest="signals_command", metavar="SUBCOMMAND", required=True)

    sim = sub.add_parser(
        "simulate",
        help="simulate one accelerometer recording of a rotor-bearing rig",
        description=(
            "Simulate one accelerometer recording. Labels 0-11 follow FLACC Table II "
            "(rotor x bearing), 12-15 add a healthy bearing, 16-19 inner-race damage: "
            + "; ".join(f"{i}={n}" for i, n in enumerate(label_names()))
        ),
    )
    sim.add_argument("--label", required=True, help="label number or ROTOR/BEARING name")
    sim.add_argument(
        "--seconds", type=POSITIVE_NUMBER, default=10.0, help="duration in s (default 10)"
    )
    sim.add_argument(
        "--fs",
        type=POSITIVE_NUMBER,
        default=DEFAULT_FS_HZ,
        help="sampling rate in Hz (default 12000)",
    )
    sim.add_argument(
        "--rpm",
        type=POSITIVE_NUMBER,
        default=None,
        help="shaft speed in rpm, 60 to 30000 (default: the machine's, ~1800)",
    )
    sim.add_argument("--seed", type=SEED, default=0, help="random seed (default 0)")
    sim.add_argument(
        "--snr-db",
        type=FINITE_NUMBER,
        default=DEFAULT_SNR_DB,
        help=f"SNR in dB against the reference level (default {DEFAULT_SNR_DB:g})",
    )
    sim.add_argument(
        "--severity",
        type=NON_NEGATIVE_NUMBER,
        default=1.0,
        help="scale of the bearing-defect impacts (default 1)",
    )
    sim.add_argument(
        "--machine-spread",
        type=NON_NEGATIVE_NUMBER,
        default=1.0,
        help="departure from the nominal rig: 0 nominal, 1 default fleet diversity",
    )
    sim.add_argument(
        "--out",
        type=Path,
        required=True,
        help="output file; format by suffix: .npz, .wav or .csv (a missing folder is created)",
    )
    sim.set_defaults(handler=run_simulate)

    ins = sub.add_parser(
        "inspect",
        help="indicators and envelope-spectrum lines of a recording",
        description=(
            "Print sampling rate, duration, RMS, kurtosis, crest factor and the strongest "
            "envelope-spectrum lines, matched to bearing defect frequencies when the shaft "
            f"speed is known. Reads {', '.join(SUPPORTED_SUFFIXES)}."
        ),
    )
    ins.add_argument("file", type=Path, help="recording to inspect")
    ins.add_argument(
        "--fs",
        type=POSITIVE_NUMBER,
        default=None,
        help="sampling rate in Hz, for files that do not store it (.mat, .npy, .csv)",
    )
    ins.add_argument(
        "--channel",
        type=_channel,
        default=None,
        help="CWRU channel (DE/FE/BA), CSV column, WAV channel index or npz key",
    )
    ins.add_argument(
        "--time-column",
        type=_channel,
        default=None,
        help="CSV column of timestamps in seconds (gives the sampling rate)",
    )
    ins.add_argument(
        "--rpm",
        type=POSITIVE_NUMBER,
        default=None,
        help="shaft speed in rpm, when the file does not store it",
    )
    ins.add_argument(
        "--bearing",
        default="6205",
        help="bearing designation or n_balls,ball_mm,pitch_mm[,angle_deg] (default 6205)",
    )
    ins.add_argument(
        "--band",
        type=_band,
        default=None,
        help="demodulation band LOW,HIGH in Hz (default 1000 to 0.45*fs)",
    )
    ins.add_argument("--top", type=POSITIVE, default=8, help="number of lines to list (default 8)")
    ins.add_argument("--json", action="store_true", help="print JSON instead of text")
    ins.set_defaults(handler=run_inspect)

    fed = sub.add_parser(
        "federation",
        help="build a federation of machines and summarise it",
        description=(
            "Build the client datasets of a scenario (or of your own manifest) and print a summary."
        ),
    )
    source = fed.add_mutually_exclusive_group()
    source.add_argument(
        "--scenario",
        choices=["mixed-fault", "label-groups"],
        default="mixed-fault",
        help="simulated federation to build (default %(default)s; label-groups takes "
        "--groups); or give --manifest",
    )
    source.add_argument(
        "--manifest",
        type=Path,
        default=None,
        help="CSV/TOML manifest of your own labelled recordings",
    )
    fed.add_argument(
        "--seed", type=SEED, default=0, help="seed of the machines and the splits (default 0)"
    )
    fed.add_argument(
        "--clients-per-group",
        type=POSITIVE,
        default=None,
        help="simulated machines per fault group (default 8; mixed-fault only)",
    )
    fed.add_argument("--groups", type=label_groups_option, help=f"{GROUPS_HELP} (label-groups)")
    fed.add_argument(
        "--window-length",
        type=whole(16),
        default=1024,
        help="samples per window, at least 16 (default 1024)",
    )
    fed.add_argument(
        "--machine-spread",
        type=NON_NEGATIVE_NUMBER,
        default=VibrationSettings.machine_spread,
        help=MACHINE_SPREAD_HELP,
    )
    fed.add_argument(
        "--snr-db",
        type=FINITE_NUMBER,
        default=DEFAULT_SNR_DB,
        help=f"sensor signal-to-noise ratio in dB (default {DEFAULT_SNR_DB:g}; scenario only)",
    )
    fed.add_argument(
        "--split-by", choices=["time", "recording"], default="time", help="manifest only"
    )
    fed.add_argument(
        "--manifest-outside-folder",
        action="store_true",
        help="accept manifest entries that name files outside the manifest's folder "
        "(refused by default)",
    )
    fed.set_defaults(handler=run_federation)


def run_simulate(args: argparse.Namespace) -> int:
    """Handler of ``signals simulate``."""
    condition = Condition.parse(str(args.label))
    rng = np.random.default_rng(args.seed)
    machine = MachineProfile.sample(rng, args.machine_spread)
    sim = simulate(
        condition,
        machine,
        args.seconds,
        rng,
        fs_hz=args.fs,
        rpm=args.rpm,
        snr_db=args.snr_db,
        severity=args.severity,
    )
    created = output_file_folder(args.out)
    if created is not None:
        print(f"created folder {created}")
    path = write_recording(sim.to_recording(source=str(args.out)), args.out)
    d = sim.defect_frequencies
    print(
        f"wrote {path}: {condition.name} (label {condition.label}), {args.seconds:g} s at "
        f"{args.fs:g} Hz, {sim.rpm:.1f} rpm; BPFO {d.bpfo_hz:.2f} Hz, BPFI {d.bpfi_hz:.2f} Hz, "
        f"2xBSF {d.ball_strike_hz:.2f} Hz, FTF {d.ftf_hz:.2f} Hz"
    )
    return 0


def format_inspection(report: Inspection) -> str:
    """Human-readable text of an inspection."""
    lines = [
        f"file          {report.source}",
        f"sampling rate {report.fs_hz:g} Hz",
        f"duration      {report.duration_s:.3f} s ({report.n_samples} samples)",
        f"RMS           {report.rms:.4g}",
        f"peak          {report.peak:.4g}",
        f"crest factor  {report.crest_factor:.3f}",
        f"kurtosis      {report.kurtosis:.3f}  (3 for Gaussian noise; impacts raise it)",
        f"shaft speed   {report.rpm:.1f} rpm"
        if report.rpm
        else "shaft speed   unknown (pass --rpm to match defect frequencies)",
    ]
    if report.defect_frequencies:
        d = report.defect_frequencies
        lines.append(
            f"defect freqs  BPFO {d['bpfo_hz']:.2f}  BPFI {d['bpfi_hz']:.2f}  "
            f"2xBSF {2 * d['bsf_hz']:.2f}  FTF {d['ftf_hz']:.2f} Hz"
        )
    low, high = report.band_hz
    lines.append(f"envelope lines (demodulated {low:g}-{high:g} Hz), strongest first:")
    for line in report.lines:
        match = f"  <- {line.match}" if line.match else ""
        lines.append(f"  {line.frequency_hz:9.2f} Hz  {line.amplitude:10.4g}{match}")
    return "\n".join(lines)


def run_inspect(args: argparse.Namespace) -> int:
    """Handler of ``signals inspect``."""
    recording = read_recording(
        args.file, fs_hz=args.fs, channel=args.channel, time_column=args.time_column, rpm=args.rpm
    )
    report = inspect_recording(
        recording, bearing=parse_bearing(args.bearing), band_hz=args.band, top=args.top
    )
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(format_inspection(report))
    return 0


@contextmanager
def machine_progress(total: int) -> Iterator[ProgressCallback]:
    """A progress bar on stderr for simulating ``total`` machines; yields its callback."""
    with Progress(total, desc="simulating machines", unit="machine") as bar:

        def advance(done: int, _total: int) -> None:
            bar.advance_to(done)

        yield advance


def build_mixed_fault(seed: int, clients_per_group: int, settings: VibrationSettings) -> Federation:
    """Build the mixed-fault federation with a progress bar on stderr."""
    with machine_progress(clients_per_group * 6) as advance:
        return mixed_fault(
            seed, clients_per_group=clients_per_group, settings=settings, progress=advance
        )


def build_scenario(args: argparse.Namespace, settings: VibrationSettings) -> Federation:
    """The simulated federation ``signals federation`` was asked for."""
    if args.scenario != "label-groups":
        return build_mixed_fault(args.seed, args.clients_per_group or 8, settings)
    total = sum(group.machines for group in args.groups)
    with machine_progress(total) as advance:
        return label_groups(args.seed, groups=args.groups, settings=settings, progress=advance)


def run_federation(args: argparse.Namespace) -> int:
    """Handler of ``signals federation``."""
    check_fleet_options(args.scenario, args.groups, args.clients_per_group)
    if args.manifest is not None:
        federation = manifest_federation(
            str(args.manifest),
            window_length=args.window_length,
            split_by=args.split_by,
            seed=args.seed,
            allow_outside_folder=args.manifest_outside_folder,
        )
    else:
        settings = VibrationSettings(
            window_length=args.window_length, machine_spread=args.machine_spread, snr_db=args.snr_db
        )
        federation = build_scenario(args, settings)
    print(federation.summary())
    return 0
