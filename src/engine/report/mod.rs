pub mod map;
pub mod svg;
pub mod tree;
