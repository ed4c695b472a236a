"""Session lifecycle: slash commands, reset policy and timers, compression, titles, resume recaps."""
