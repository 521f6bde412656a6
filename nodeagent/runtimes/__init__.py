"""Runtimes behind one interface (`base.Runtime`): ONNX Runtime on CPU (`onnx`), TensorRT on GPU
(`tensorrt`, imported lazily), chosen by `select`. Nothing is imported here, so that the agent,
which only asks whether TensorRT is installed, never loads a runtime into its own process."""
