"""Fused LM head + log-softmax + gather."""
