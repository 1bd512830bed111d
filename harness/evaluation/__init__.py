"""Evaluations of checkpoints: perplexity and its bounds (more arrive with Gen PPL, zero-shot, FID)."""
