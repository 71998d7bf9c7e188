// Package placementsim is a pure, in-process simulation of tablet grains
// placed over many coordinators. It owns:
//
//   - the grain identity of tablet actors: kind Kind, identity
//     "<table>/g<generation>/t<index>" (grainIdentity);
//   - simulated coordinator member lists (Members, in three addressing
//     schemes: the placement hashes each member's "host:port");
//   - the placement of every tablet by protoactor-go's own
//     cluster.Rendezvous, the function identitylookup/disthash calls (not
//     a copy), and by PlaceOwner (tablets.Owner, what coordinators use:
//     protoactor's FNV-1a hash spreads addresses that differ only in
//     their last bytes unevenly);
//   - the figures computed from placements: the spread of grains over
//     coordinators (SpreadOf) and the tablets that move when one
//     coordinator joins or leaves (Compare);
//   - HostView, a load view of many scan-server hosts built with
//     selection's own types, for measuring selection decisions per core.
//
// Nothing here touches the network, starts goroutines or reads a clock;
// randomness comes from seeds. Timings come from the package's
// benchmarks and by its report test, never asserted:
//
//	go test ./internal/sim/placementsim -run TestPlacementReport -placementsim.full -v -timeout 0
//	go test ./internal/sim/placementsim -run '^$' -bench . -benchtime 2s
//
// The figures and what they mean are in MEASUREMENTS.md ("Scale
// simulation"). The package is measurement infrastructure: nothing
// outside its tests imports it.
package placementsim
