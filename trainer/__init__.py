"""SageMaker training container for distributed TensorFlow."""
