//! Bootstrap: how ranks find each other (filled by the bootstrap work).
