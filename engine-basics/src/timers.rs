//! Named timers with reasons: the deadline table both engines keep (moved here from the engines).
