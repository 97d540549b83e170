pub mod bill;
pub mod map;
pub mod svg;
pub mod tree;
