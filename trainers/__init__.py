"""Training loops and schedules (fresh, perfect, torch), small models, time-to-accuracy reports."""
