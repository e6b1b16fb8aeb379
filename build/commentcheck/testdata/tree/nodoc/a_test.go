// Package nodoc's doc in a test file does not count.
package nodoc
