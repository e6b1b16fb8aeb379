package client

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

var fastReconnect = grpc.ConnectParams{
	Backoff: backoff.Config{
		BaseDelay:  20 * time.Millisecond,
		Multiplier: 1.6,
		Jitter:     0.2,
		MaxDelay:   time.Second,
	},
	MinConnectTimeout: 5 * time.Second,
}
