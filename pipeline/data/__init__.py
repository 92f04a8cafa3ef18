"""Layer 1: datasets (LoCoMo, LongMemEval), splits, and the dataset registry."""
