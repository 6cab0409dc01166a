//! Launch: reading launcher environments and starting local ranks.
