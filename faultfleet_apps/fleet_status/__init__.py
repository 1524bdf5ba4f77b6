"""``faultfleet status``: the fleet read from the broker's retained messages, read-only.

:mod:`~faultfleet_apps.fleet_status.view` folds the messages into the status document,
:mod:`~faultfleet_apps.fleet_status.reader` reads them from the broker,
:mod:`~faultfleet_apps.fleet_status.render` prints the table and
:mod:`~faultfleet_apps.fleet_status.settings` holds the broker login.
"""
