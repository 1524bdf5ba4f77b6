"""faultfleet: clustered federated learning for industrial machine fault diagnosis.

This package holds what every faultfleet process shares — common array types and the
``faultfleet`` command line (the composition root that wires the other packages).
"""

__version__ = "0.1.0"
