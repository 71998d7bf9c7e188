package client_test

import (
	"context"
	"fmt"
	"log"

	"github.com/scanplane/scanplane/client"
)

// Inside the cluster's network a program may opt into the actor path:
// the scan servers dial the client's own endpoint (Config.Listen,
// Config.Advertise) and stream rows straight to it.
func ExampleDial() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	for r, err := range c.All(ctx, "demo", client.KeyRange([]byte("row000000100"), []byte("row000000200")), client.ScanOptions{}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s\t%s\n", r.Key, r.Value)
	}
}

// Count a range at the scan servers through the API: no rows travel.
func ExampleAPI_Count() {
	ctx := context.Background()
	a, err := client.NewAPI(client.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	n, err := a.Count(ctx, "demo", client.Prefix([]byte("row0000")), client.ScanOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(n, "rows")
}
