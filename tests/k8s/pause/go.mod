module sprout.test/k8s/pause

go 1.21
