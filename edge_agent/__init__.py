"""Edge agent: the process that runs on each machine's gateway.

It windows live vibration through :mod:`signal_pipeline`, trains locally, exchanges model
updates with the coordinator over MQTT and diagnoses windows with ONNX Runtime. The MQTT
runtime is not part of this release yet; see the README's roadmap.
"""
