"""Layer 6: MLflow tracking, prompt registry, plots and prompt export."""
