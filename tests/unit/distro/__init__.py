"""Unit tests for psyche.distro (DisTrO: DCT, top-k, payload format, optimizer)."""
