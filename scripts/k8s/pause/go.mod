// The pod sandbox ("pause") process of the test cluster that
// scripts/ensure-k8s.sh runs. Its own module: it is not part of berth.
module berthk8spause

go 1.22
