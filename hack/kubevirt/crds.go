// KubeVirt's CRDs as its virt-operator installs them, printed as one JSON List. hack/kubevirt.sh
// copies this file into the kubevirt.io/kubevirt module it builds (cmd/wug-crds), with the list
// of generators read from that version's install strategy inserted after the imports. JSON, not
// YAML: KubeVirt's YAML marshaller wrote invalid YAML for three of its CRDs.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components"
)

// END IMPORTS

func main() {
	list := map[string]interface{}{"apiVersion": "v1", "kind": "List"}
	items := []interface{}{}
	for _, generate := range generators {
		crd, err := generate()
		if err != nil {
			fmt.Fprintln(os.Stderr, "wug-crds:", err)
			os.Exit(1)
		}
		crd.TypeMeta.APIVersion = "apiextensions.k8s.io/v1"
		crd.TypeMeta.Kind = "CustomResourceDefinition"
		// Written by virt-operator at install; not part of what a client applies.
		crd.Status = extv1.CustomResourceDefinitionStatus{}
		items = append(items, crd)
	}
	list["items"] = items
	out, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		fmt.Fprintln(os.Stderr, "wug-crds:", err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}
