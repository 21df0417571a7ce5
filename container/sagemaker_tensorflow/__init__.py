"""`from sagemaker_tensorflow import PipeModeDataset` on the TensorFlow 2.21 line, where AWS's
package does not exist: the project's own (trainer.pipe_mode_dataset). Installed by the 2.21
image and the 2.21 test environment only; the 2.14 line has AWS's."""
from trainer.pipe_mode_dataset import PipeModeDataset, PipeModeDatasetException  # noqa: F401

PROVIDED_BY = "trainer"
