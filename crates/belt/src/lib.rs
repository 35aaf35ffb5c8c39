//! The Conveyor Belt (Eliá Algorithm 2, Gyro Algorithm 1), sans-IO.
//!
//! [`ConveyorBelt`] is one instance's protocol state machine: commutative and local requests
//! become storage jobs at once; global requests wait in the queue Q; the token carries
//! ⟨state update, origin⟩ entries around a fixed ring. [`ClosedLoopClient`] is the client
//! library: it sends each request to its home instance and follows MAP replies.

mod client;
mod node;

pub use client::{ClosedLoopClient, ThinkTime};
pub use node::{BeltConfig, BeltStats, ConveyorBelt, GlobalExecution, Message, Token, TokenEntry};
