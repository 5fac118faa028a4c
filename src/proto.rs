//! flyteidl2 connector protocol subset (being built)
