"""The error hierarchy every faultfleet package raises from.

::

    FaultfleetError            anything faultfleet raises on purpose
    ├── UsageError             something the user can fix: a value, a file, an option
    │   ├── SettingsError          a settings file or override (wire.settings)
    │   ├── KeyFileError           a signing key file or key text (wire.signing)
    │   ├── MetricsServerError     the metrics port cannot be bound; also OSError (metrics_http)
    │   ├── RecordingError         a recording that cannot be used (signal_pipeline.recording)
    │   ├── StateError             a state folder that cannot be read (coordinator.engine.state)
    │   ├── PlacementStoreError    a placements file that is unreadable; also RuntimeError
    │   │                          (coordinator.adapters.placement_store)
    │   ├── ServiceError           a state folder of another run; also RuntimeError
    │   │                          (coordinator.runtime.checkpoint)
    │   ├── RegistryError          a model registry file that is missing or corrupt; also
    │   │                          RuntimeError (coordinator.adapters.model_registry)
    │   ├── CampaignStoreError     a campaign file that is unreadable; also RuntimeError
    │   │                          (coordinator.adapters.campaign_store)
    │   ├── LabelsFileError        a labels file row or a time that cannot be read
    │   │                          (edge_agent.labels_file)
    │   ├── RetireError            the broker is unreachable or the agent still runs; also
    │   │                          RuntimeError (edge_agent.retire)
    │   ├── StatusError            ``faultfleet status`` cannot read the fleet from the broker
    │   │                          (faultfleet_apps.fleet_status.reader)
    │   ├── BrokerError            the demo's broker cannot start; also RuntimeError
    │   │                          (faultfleet_apps.brokers.launch)
    │   ├── DatasetError           an image dataset's files are missing or damaged
    │   │                          (faultfleet_apps.imagebench.errors)
    │   └── CellUsageError         a benchmark cell failed on a user error; also CellError
    ├── WireError              a message that cannot be accepted; also ValueError (wire.codec)
    ├── TensorFormatError      a safetensors body that cannot be read; also ValueError
    │                          (wire.tensor_view)
    ├── PublishError           a message could not be queued; also RuntimeError (wire.dispatch)
    ├── SignatureError         a signed message that does not verify; also ValueError
    │                          (wire.signing)
    ├── QuorumError            too few updates by the round deadline; also RuntimeError
    │                          (coordinator.adapters.round_tasks)
    ├── RoundAbortedError      the fleet was aborted mid-round; also RuntimeError
    │                          (coordinator.adapters.round_tasks)
    ├── OnnxVerificationError  ONNX Runtime disagrees with torch; also RuntimeError
    │                          (coordinator.adapters.onnx_export)
    ├── ModelIntegrityError    an unusable model payload; also ValueError (edge_agent.inference)
    ├── NoModelError           a prediction before any model; also RuntimeError
    │                          (edge_agent.inference)
    ├── LogWriteError          lines of the diagnosis log lost to a failed write; also
    │                          OSError (edge_agent.diagnosis_log)
    ├── ModelRefusedError      a model frame or assignment an agent refuses; also ValueError
    │                          (edge_agent.model_intake)
    ├── OversizedPacketError   a packet above the embedded broker's limit
    │                          (faultfleet_apps.brokers.embedded)
    └── CellError              a benchmark cell failed (faultfleet_apps.imagebench.bench)
        └── CellUsageError     ... because of something the user can fix; also UsageError

Each error keeps the builtin base its callers catch (``ValueError``, ``RuntimeError``,
``OSError``); :class:`UsageError` is a ``ValueError``. ``tests/faultfleet/test_errors.py``
checks that every exception class of the project is in this tree, under its real base.

Which error to raise
--------------------
A check of a value the user gives — a command-line option, a setting, a file, the content
of a file, a strategy's hyper-parameter — raises a :class:`UsageError` whose message names
what is wrong and what to do instead. A check of what the code itself computed (array
shapes between modules, a strategy's bookkeeping, a message the fleet protocol forbids)
raises a plain ``ValueError``/``RuntimeError`` or one of the other errors above: when one
reaches the command line, it is a bug in faultfleet.

The command line (:mod:`faultfleet_apps.cli.main`) prints a :class:`UsageError` as one line
``faultfleet: error: …`` and exits with status 2; any other exception is reported as an
internal error (exit status 70, the traceback with ``faultfleet --debug``).
"""

from __future__ import annotations


class FaultfleetError(Exception):
    """Base of every error faultfleet raises on purpose."""


class UsageError(FaultfleetError, ValueError):
    """Something the user can fix: a bad value, file, option or setting.

    The message names what is wrong and what to do instead.
    """
