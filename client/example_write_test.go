package client_test

import (
	"context"
	"fmt"
	"log"

	"github.com/scanplane/scanplane/client"
)

// Write a table, rows in any order, with the admin certificate of a
// secured cluster's secrets directory. The rows become the table's
// current generation at Commit, all at once; Abort, or any error,
// leaves the table as it was.
func ExampleClient_NewWriter() {
	ctx := context.Background()
	cfg := client.DefaultConfig()
	tlsCfg, err := client.AdminTLSFromSecrets("./data/secrets")
	if err != nil {
		log.Fatal(err)
	}
	cfg.TLS = tlsCfg
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	w, err := c.NewWriter(ctx, "users", client.WriteOptions{Tablets: 4})
	if err != nil {
		log.Fatal(err)
	}
	for i := 999; i >= 0; i-- {
		if err := w.Write(fmt.Appendf(nil, "user%04d", i), []byte("{}")); err != nil {
			log.Fatal(err) // the Writer is aborted
		}
	}
	gen, err := w.Commit()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("users is at generation", gen)
}
