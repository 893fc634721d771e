//! The smallest Rust binary: prints a version line, like `warren --version`.
fn main() {
    println!("floor 0.0.0");
}
