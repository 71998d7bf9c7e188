package tablets

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/messages"
)

// TableKeyLister is a BlockStore that lists the keys of one table's
// objects (bus.BlockStore): every key FileID, BlockKey and IndexKey make
// for the table, which all begin with the table's name and a dot.
type TableKeyLister interface {
	TableKeys(ctx context.Context, table string) ([]string, error)
}

// keyGeneration returns the file id and generation of an object key of
// table ("<table>.g<gen>.t<index>.<nonce>[.f<k>].(b<n>|idx)"); ok is false
// for a key of another shape.
func keyGeneration(table, key string) (fileID string, gen uint64, ok bool) {
	rest, found := strings.CutPrefix(key, table+".g")
	if !found {
		return "", 0, false
	}
	g, _, found := strings.Cut(rest, ".")
	if !found {
		return "", 0, false
	}
	gen, err := strconv.ParseUint(g, 10, 64)
	if err != nil {
		return "", 0, false
	}
	dot := strings.LastIndexByte(key, '.')
	return key[:dot], gen, true
}

// SweepOrphans deletes the objects of table whose file no stored
// generation names, of generations up to upTo, and likewise the
// manifests no stored generation names when meta is a ManifestStore:
// what an ingest that failed could not remove (its store was out of
// space or unreachable, or it was killed), and what a generation's
// deletion left when it stopped half way. Objects of newer generations
// (an ingest under way) are left alone; an ingest calls it after it
// published generation upTo, whose record it passes as published (nil
// for none): what that record names is never deleted, whether or not
// gens lists it yet. It returns the number of objects and manifests
// deleted; it stops at the first failed delete.
func SweepOrphans(ctx context.Context, store TableKeyLister, meta MetaStore, gens GenerationLister, table string, upTo uint64, published *messages.TableMeta) (int, error) {
	keys, err := store.TableKeys(ctx, table)
	if err != nil {
		return 0, fmt.Errorf("sweep %s: listing objects: %w", table, err)
	}
	ms, _ := meta.(ManifestStore)
	var manifests []ManifestID
	if ms != nil {
		if manifests, err = ms.Manifests(ctx, table); err != nil {
			return 0, fmt.Errorf("sweep %s: listing manifests: %w", table, err)
		}
	}
	if len(keys) == 0 && len(manifests) == 0 {
		return 0, nil
	}
	stored, err := gens.Generations(ctx, table)
	if err != nil {
		return 0, fmt.Errorf("sweep %s: %w", table, err)
	}
	named := map[string]bool{}
	namedManifests := map[ManifestID]bool{}
	if len(RecordManifests(published)) > 0 && ms != nil {
		// The record as published names manifests, not their files.
		full := proto.Clone(published).(*messages.TableMeta)
		if err := LoadManifests(ctx, full, func(ctx context.Context, id ManifestID) ([]byte, error) {
			return ms.GetManifest(ctx, table, id.Gen, id.Digest)
		}); err != nil {
			return 0, fmt.Errorf("sweep %s: generation %d: %w", table, published.GetGeneration(), err)
		}
		published = full
	}
	records := []*messages.TableMeta{published}
	for _, g := range stored {
		if g == published.GetGeneration() {
			continue
		}
		tm, err := meta.Get(ctx, table, g)
		if err != nil {
			return 0, fmt.Errorf("sweep %s: generation %d: %w", table, g, err)
		}
		records = append(records, tm)
	}
	for _, tm := range records {
		for _, tab := range tm.GetTablets() {
			for _, f := range tab.GetFiles() {
				named[f.GetId()] = true
			}
		}
		for _, id := range RecordManifests(tm) {
			namedManifests[id] = true
		}
	}
	n := 0
	for _, id := range manifests {
		if id.Gen > upTo || namedManifests[id] {
			continue
		}
		if err := ms.DeleteManifest(ctx, table, id.Gen, id.Digest); err != nil {
			return n, fmt.Errorf("sweep %s: deleting orphan manifest %s: %w", table, ManifestName(id), err)
		}
		n++
	}
	bs, ok := store.(BlockStore)
	if !ok {
		return n, fmt.Errorf("sweep %s: %T is not a BlockStore", table, store)
	}
	for _, k := range keys {
		id, g, ok := keyGeneration(table, k)
		if !ok || g > upTo || named[id] {
			continue
		}
		if err := bs.Delete(ctx, k); err != nil {
			return n, fmt.Errorf("sweep %s: deleting orphan %s: %w", table, k, err)
		}
		n++
	}
	return n, nil
}
