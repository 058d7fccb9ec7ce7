// Command gpt is a training program that uses autopar as a library: it writes a small
// GPT-style language model with the tracing builder, compiles it for four CPU devices, and
// trains it on autopar's runtime, one goroutine per device, printing the loss of each step.
//
//	go run ./examples/gpt -steps 50
//
// The model is two pre-LN transformer blocks (hidden 64, 4 heads) over sequences of 16
// tokens from a vocabulary of 128, in batches of 16. The data is one fixed random batch, so
// the loss falls as the model memorizes it: enough to see every device's work add up to a
// training step.
package main
