"""An agent process that goes online and never answers, for last-will tests.

``python -m tests.integration.ghost_agent HOST PORT AGENT_ID`` connects with the retained
``offline`` last will a real agent leaves, publishes a retained ``online`` status (able to
train), prints ``ready`` once the broker acknowledged it, and then only waits. Killing the
process (SIGKILL) makes the broker publish the last will, exactly as for a crashed gateway.
It imports neither torch nor the agent's data, so it starts in well under a second.
"""

from __future__ import annotations

import sys
import time

from faultfleet.wire.messages import AgentStatus
from faultfleet.wire.mqtt import MqttConnection, Will
from faultfleet.wire.settings import BrokerSettings
from faultfleet.wire.topics import Topics


def main(argv: list[str]) -> int:
    host, port, agent_id = argv[0], int(argv[1]), argv[2]
    topics = Topics()
    offline = AgentStatus(agent_id=agent_id, state="offline").model_dump_json().encode()
    connection = MqttConnection(
        client_id=f"ghost-{agent_id}",
        settings=BrokerSettings(host=host, port=port),
        will=Will(topics.agent_status(agent_id), offline),
    )
    connection.start()
    if not connection.wait_connected(10.0):
        print(f"could not connect to {host}:{port}", flush=True)
        return 1
    online = AgentStatus(agent_id=agent_id, state="online", can_train=True, num_train_samples=10)
    connection.publish_wait(topics.agent_status(agent_id), online.model_dump_json(), retain=True)
    print("ready", flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
