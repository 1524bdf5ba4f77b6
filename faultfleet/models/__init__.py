"""Models shared by the edge agent (training, inference) and the coordinator (ONNX export)."""
